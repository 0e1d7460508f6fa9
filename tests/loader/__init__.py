"""The running loader: resume, elastic resume, framework hooks, evaluation, stats, threads."""
