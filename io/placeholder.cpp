// placeholder until the HDF5 io lands
