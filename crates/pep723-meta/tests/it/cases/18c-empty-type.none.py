# /// 
# dependencies = []
# ///
