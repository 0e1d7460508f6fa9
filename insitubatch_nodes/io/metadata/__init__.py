"""What the selected arrays are: zarr layouts, dimension names, levels, the time axis,
and what differs between zarr releases."""
