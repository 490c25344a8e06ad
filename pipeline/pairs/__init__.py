"""The `pairs` stage: verified Clean-Noise pairs with a patient-disjoint train/test split."""
