"""The running loader: iteration that stops the graph's IO, its state, rank states and
elastic resume."""
