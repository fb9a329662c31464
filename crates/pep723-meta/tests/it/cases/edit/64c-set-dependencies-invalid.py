# /// script
# dependencies = ["old"]
# ///
