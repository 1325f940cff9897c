#!/bin/bash
# issue 50: the README's first command, whole, in a fresh debootstrap root (see docs/PERFORMANCE.md First run)
set -u
export TZ=UTC
R=/srv/fresh12q
L=/work/fr50
cd $L
git clone -q /work/main $R/root/flytune || exit 1
git -C $R/root/flytune rev-parse --short HEAD > commit.txt
git -C $R/root/flytune log -1 --format='%H %s' >> commit.txt
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount --bind /dev $R/dev
mount --bind /dev/pts $R/dev/pts
mount --bind /usr/local/cuda-13.0 $R/usr/local/cuda-13.0
mount -o remount,bind,ro $R/usr/local/cuda-13.0
(while sleep 60; do echo "$(date -u +%T) $(uptime)"; done) >> uptime.log 2>&1 &
echo $! > uptime.pid
echo "start $(date -u +%T) $(uptime)" >> uptime.log
cat /proc/net/dev > netdev.before
/usr/bin/time -v -o time.txt env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /usr/sbin/chroot $R /bin/bash -c 'cd /root/flytune && bash scripts/setup.sh --main-job && bash scripts/main-job.sh' 2>&1 \
  | while IFS= read -r l; do printf '%(%H:%M:%S)T %s\n' -1 "$l"; done > run.log
echo "rc=${PIPESTATUS[0]}" > rc.txt
cat /proc/net/dev > netdev.after
echo "end $(date -u +%T) $(uptime)" >> uptime.log
kill "$(cat uptime.pid)"
ls $R/var/cache/apt/archives/*.deb | wc -l > debs.txt
du -sm $R/var/cache/apt/archives >> debs.txt
umount $R/usr/local/cuda-13.0 $R/dev/pts $R/dev $R/sys $R/proc
echo done
