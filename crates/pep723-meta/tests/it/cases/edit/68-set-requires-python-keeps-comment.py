# /// script
# requires-python = ">=3.9"  # oldest supported
# ///
