"""What the tests share: stores written by zarr-python, graphs, strategies, servers,
faults, scripts run as processes."""
