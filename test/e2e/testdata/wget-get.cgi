#!/busybox sh
# /cgi-bin/get?path=/v1/x, served by busybox httpd in the e2e suite's wgetapp
# pod: one GET of the path with busybox wget, in plain HTTP to the injected
# retryguard-proxy on localhost. The answer is wget's exit code: 0 only for a
# whole answer read to its end. (The root file system is read-only: the body
# goes to /dev/null.)
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
code=$({ $bb wget -q -O - --header "Retryguard-Var-User-Id: get" --header "Retryguard-Var-Login-Session-Id: get" \
	"http://127.0.0.1:15001$path" 2>/dev/null; echo "$?" >&2; } 2>&1 >/dev/null)
echo "Content-Type: application/json"
echo ""
echo "{\"exit\":${code:-255}}"
