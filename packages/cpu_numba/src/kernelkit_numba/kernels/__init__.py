"""The backend's kernels, one module per op family; importing a module registers its kernels."""
