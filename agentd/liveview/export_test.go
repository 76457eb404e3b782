package liveview

// LogBytesRead is how many log bytes s has read from the API server.
func (s *Server) LogBytesRead() int64 { return s.logBytesRead.Load() }
