package console

import "net/http"

func (s *Server) apiJobs(w http.ResponseWriter, _ *http.Request, _ principal) {
	writeJSON(w, http.StatusOK, struct {
		Jobs []JobView `json:"jobs"`
	}{s.jobs.all()})
}

func (s *Server) apiJob(w http.ResponseWriter, r *http.Request, _ principal) {
	j := s.jobs.get(r.PathValue("id"))
	if j == nil {
		apiError(w, http.StatusNotFound, "not_found", "no job "+r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, j.snapshot())
}

// apiJobCancel cancels a running job; the rows it already moved stay moved.
func (s *Server) apiJobCancel(w http.ResponseWriter, r *http.Request, _ principal) {
	j := s.jobs.get(r.PathValue("id"))
	if j == nil {
		apiError(w, http.StatusNotFound, "not_found", "no job "+r.PathValue("id"))
		return
	}
	j.cancel()
	writeJSON(w, http.StatusAccepted, j.snapshot())
}
