# /// script
# dependencies = "rich"
# ///
