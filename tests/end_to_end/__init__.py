"""Whole runs as users make them: training frameworks, recipes, the README, the bad-input table."""
