package redissink

// Classify exposes the error classification to the black-box tests, for
// server replies a test cannot provoke on a shared server (LOADING, BUSY...).
var Classify = classify
