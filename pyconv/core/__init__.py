"""The project's ground floor: errors, paths, argument checks, atomic files, the data set, the model file, the
course's architectures, the numpy reference and the MXNet checkpoint import. Imports nothing else of pyconv."""
