# /// script
#	dependencies = ["rich"]
# ///
