# /// script
#dependencies = ["rich"]
# ///
