#!/vhead/bin/sh
# The configfs gadget ffff:0006 with one FunctionFS function (see vhead/init).
G=/sys/kernel/config/usb_gadget/nao
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
mkdir -p $G/strings/0x409 $G/configs/c.1/strings/0x409 $G/functions/ffs.chest
echo 0xffff >$G/idVendor
echo 0x0006 >$G/idProduct
echo "nao-rs virtual head" >$G/strings/0x409/manufacturer
echo "NAO chest board (nao-rs-sim)" >$G/strings/0x409/product
[ -e $G/configs/c.1/ffs.chest ] || ln -s $G/functions/ffs.chest $G/configs/c.1/
mkdir -p /dev/ffs-chest /vhead/out
mountpoint -q /dev/ffs-chest || mount -t functionfs chest /dev/ffs-chest
