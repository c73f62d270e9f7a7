#!/vhead/bin/sh
# Bind once nao-rs-sim has written its descriptors (the UDC refuses before).
G=/sys/kernel/config/usb_gadget/nao
i=0
while [ $i -lt 100 ]; do
    echo dummy_udc.0 >$G/UDC 2>/dev/null && exit 0
    sleep 0.2
    i=$((i + 1))
done
echo "vhead: cannot bind the gadget to dummy_udc.0" >&2
exit 1
