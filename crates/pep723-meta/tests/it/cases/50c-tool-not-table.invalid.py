# /// script
# tool = 1
# ///
