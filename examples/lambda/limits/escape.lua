-- Tries to reach the server's host: there is no os, io, require or load.
return os.execute("id")
