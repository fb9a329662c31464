# ///script
# dependencies = []
# ///
