"""The machine and the process a loader runs in: memory, cores, local ranks, thread names, forks."""
