#!/busybox sh
# /cgi-bin/admin?path=/deadletters, served by busybox httpd in the e2e suite's
# wgetapp pod: the injected sidecar's admin port answers on the pod's own
# loopback only, so the suite reads it from inside the pod, as the
# application would.
bb=/busybox
path=
for kv in $(echo "$QUERY_STRING" | $bb tr '&' ' '); do
	case $kv in
	path=*) path=${kv#path=} ;;
	esac
done
case $path in
/[A-Za-z0-9/_-]*) ;;
*) path=/invalid ;;
esac
echo "Content-Type: application/json"
echo ""
$bb wget -q -O - "http://127.0.0.1:15020$path" 2>/dev/null
