"""Sample order: keyed permutations of an epoch's anchors (`permutation`), the weighted
schedule of a mixture (`mixture`) and its weights from the datasets' sizes (`weights`),
and the global sample stream both make (`stream`)."""
