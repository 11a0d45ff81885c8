import sys; sys.path.insert(0,'/tmp/adv'); from lib import *
P=18778
for path,m in [('/v1/attention','POST'),('/v2','GET'),('/v2/models/zzz','GET'),('/v2/models/attention/infer','PUT'),('/v2/systemsharedmemory/status','GET'),('/metrics','GET'),('/healthz','GET'),('/v2/health/ready','GET'),('/nope','GET')]:
    for auth in [None,'Bearer s3cret','Bearer wrong','bearer s3cret','Bearer  s3cret','Basic s3cret','Bearer s3cret ', 'Bearer s3cretX']:
        h={'Authorization':auth} if auth else {}
        r=req(m,path,TINY if m=='POST' else b'',h,port=P,timeout=3)
        st=r.split(b'\r\n')[0].decode()[9:]; w=re.search(rb'WWW-Authenticate: ([^\r]*)',r)
        print(m,path,repr(auth),st,w.group(1).decode() if w else '', r.split(b'\r\n\r\n',1)[-1][:90])
# big body without token: CL over limit and no token
r=raw(b'POST /v1/attention HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n', port=P, timeout=3, shut=False); print('big no token', r.split(b'\r\n')[0], r.split(b'\r\n\r\n',1)[-1][:150])
