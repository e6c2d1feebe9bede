"""Data server, report browser, PySpark reporter and HTML rendering (the reports issue)."""
