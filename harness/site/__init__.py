"""The static results site (`bin/harness results site --out DIR`): pages and SVG plots of a results store."""
