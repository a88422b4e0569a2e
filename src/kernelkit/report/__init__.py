"""Views of results: terminal tables (and, later, plots and reports)."""
