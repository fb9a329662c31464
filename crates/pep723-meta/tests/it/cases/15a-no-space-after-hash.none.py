#/// script
# dependencies = []
# ///
