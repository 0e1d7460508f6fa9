"""Building a loader: the settings checked, one plan made, the graph wired from it."""
