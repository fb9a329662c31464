# /// script
# dependencies = []
# ///
