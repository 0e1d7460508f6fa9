"""Getting batches onto an accelerator: staging memory, copies, and decode on the device."""
