"""What a run leaves and how it is read: the results folder (`store`, the one module that writes it), the
record and run schemas, bench metrics, comparison statistics and tables (`compare`), plots, the HTML page
and the output files it writes (`outdir`)."""
