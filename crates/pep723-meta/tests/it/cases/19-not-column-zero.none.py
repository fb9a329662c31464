pass # /// script
# dependencies = []
# ///
