# /// script 
# dependencies = []
# ///
