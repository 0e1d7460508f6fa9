"""Everything that touches storage: opening stores, reading layouts, the fetch event loop."""
