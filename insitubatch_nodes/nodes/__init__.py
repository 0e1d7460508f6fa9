"""The six stages of the default graph, one module each."""
