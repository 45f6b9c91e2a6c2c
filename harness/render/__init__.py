"""Results drawn for a reader: the comparison table as files, night-against-night and bisect text, charts (SVG by
hand, PNG/PDF with matplotlib), the HTML page and its templates, and the output files a user asked for."""
