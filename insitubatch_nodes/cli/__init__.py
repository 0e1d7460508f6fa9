"""The `insitubatch` command: its subcommands and the text reports they print."""
