package mqttsink

// Internals for the black-box tests: the PUBACK mapping (which Mosquitto
// does not let a test provoke without configuration) and the packet size
// computation (checked against paho's encoder).
var (
	ClassifyPuback = classifyPuback
	PacketSize     = packetSize
)
