"""Opening what the user points at (a URL, a path, a Store, Icechunk) as a read-only zarr
store, with credentials kept out of every text."""
