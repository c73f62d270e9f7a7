//! Import Linux usbmon captures (pcap) into the recording format.
