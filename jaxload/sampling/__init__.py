"""Sample order: keyed permutations of an epoch's anchors (`permutation`), the weighted
schedule of a mixture (`mixture`), and the global sample stream both make (`stream`)."""
