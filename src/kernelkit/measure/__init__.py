"""The measurement engine: timing modes and stopping rule (timer), statistics (stats), device ceilings (device)."""
