"""Reports from saved results alone: reading, aggregating over seeds, the verdict, plots and the
rendered pages."""
