"""The tests, in folders that mirror the package's layers, plus end-to-end runs and shared
helpers."""
