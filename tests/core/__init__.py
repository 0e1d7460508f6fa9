"""The pure core: index math against brute force and properties."""
