

v1StatusFailuregone"Expired0š