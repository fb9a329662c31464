# /// script
# ///
