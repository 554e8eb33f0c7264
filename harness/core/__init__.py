"""The ground floor: errors, atomic writes, file readers and schema, signals, timing, image I/O."""
