# /// other
# x
# ///
# /// script
# dependencies = ["rich"]
# ///
