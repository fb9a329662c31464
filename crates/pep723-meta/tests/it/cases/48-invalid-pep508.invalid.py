# /// script
# dependencies = ["requests>="]
# ///
