#!/bin/sh
# ipmi_sim's chassis_control program for the IPMI power tests: a chassis whose power and boot
# device live in files, so that they persist between calls and a test can read them back.
#
#   chassis_control.sh <state-dir> get <parm>...          prints "<parm>:<value>" per parm
#   chassis_control.sh <state-dir> set <parm> <value>...  prints nothing on success
#
# parm is power (1 or 0), reset (a pulse: 1), shutdown (a soft off: 1) or boot (none, pxe,
# cdrom, bios, default; ipmitool's "disk" arrives as "default"). Power starts off. Every call is
# appended to <state-dir>/calls.log. Errors go to standard output, as ipmi_sim expects.
set -u
dir=$1
op=$2
shift 2
echo "$op $*" >> "$dir/calls.log"

case $op in
get)
    for parm in "$@"; do
        case $parm in
        power) val=$(cat "$dir/power" 2>/dev/null || echo 0) ;;
        boot) val=$(cat "$dir/boot" 2>/dev/null || echo default) ;;
        *) echo "Invalid parameter: $parm"; exit 1 ;;
        esac
        echo "$parm:$val"
    done
    ;;
set)
    while [ $# -gt 0 ]; do
        parm=$1
        if [ $# -lt 2 ]; then echo "No value present for parameter $parm"; exit 1; fi
        val=$2
        shift 2
        case $parm in
        power)
            case $val in 0|1) echo "$val" > "$dir/power" ;; *) echo "Invalid power value: $val"; exit 1 ;; esac ;;
        reset)
            echo 1 > "$dir/power" ;;
        shutdown)
            echo 0 > "$dir/power" ;;
        boot)
            case $val in none|pxe|cdrom|bios|default) echo "$val" > "$dir/boot" ;; *) echo "Invalid boot value: $val"; exit 1 ;; esac ;;
        identify)
            shift ;;
        *)
            echo "Invalid parameter: $parm"; exit 1 ;;
        esac
    done
    ;;
check)
    exit 1 ;;
*)
    echo "Unknown operation: $op"; exit 1 ;;
esac
