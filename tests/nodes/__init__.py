"""Each stage of the graph against its pure reference, and its state."""
