# /// script!!
# dependencies = []
# ///
