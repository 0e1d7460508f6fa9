"""Pure index math: geometry, splits, permutation, partition, read plans, draw order. No IO."""
