"""The insitubatch command as users run it."""
